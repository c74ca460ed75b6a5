"""Bin-packing answers on the scheduler's own host states (issue 27): stranded capacity,
compaction, a consolidation plan, sellable headroom. Pure: host states and flavors in, numbers
out (a MILP solve is computation). docs/packing.md describes each method."""
