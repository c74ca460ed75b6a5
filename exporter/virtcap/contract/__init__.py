"""The HTTP contract of /api/v1: what the API reads and answers, as pydantic models, one module per
resource (capacity, claims, maintenance, placements), the field types they share (fields,
quantities), the bounds of a body and the error document (bodies), and the OpenAPI document
generated from them (openapi).

The server (virtcap.web) and `virtcap place` hold to it; it imports
neither. It sits below the service layer and above the claims: it describes claims
(fleet.claim_records) and checks a body with the model and configuration rules, and the dry run
(service/dryrun.py) and the capacity report (exposition) answer with its documents.
"""
