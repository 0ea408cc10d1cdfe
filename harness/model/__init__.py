"""The published model's figures (docs/model.md §9): ``reproduce`` measures them against the
embedded reference server, ``calibrate`` fits API-tier and engine parameters to a run."""
