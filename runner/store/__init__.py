"""Campaign files, ledgers and lineage."""
