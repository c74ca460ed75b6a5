"""Bin-packing answers on the scheduler's own types (issue 27): stranded capacity, compaction, a
consolidation plan, sellable headroom. Pure: host states and flavors in, numbers out (a MILP
solver's call is computation). docs/packing.md says, per answer, where it is exact."""
