"""Bin-packing answers on the scheduler's own host states (issue 27): stranded capacity,
compaction, a consolidation plan, sellable headroom. Pure: a MILP solve is computation (HiGHS,
single-threaded, with a time limit). docs/packing.md describes each method."""
