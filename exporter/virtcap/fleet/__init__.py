"""The fleet as the scheduler sees it, shared by the layers above: each hypervisor's snapshot and
the store of them (snapshot, store), the claim records pending on it (claim_records), dry-run and
claim scheduling over it (scheduling) and its failure tolerance (tolerance).

Below the claims ledger, the service's tasks and the exposition, which all read it; above audit,
config and model, whose facts and policies it is made of. Nothing here does I/O: the tasks that
fill the store and compute in the background are the service layer's.
"""
