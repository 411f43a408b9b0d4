"""The shared contract every stage speaks: the snapshot model, the table and landing
layouts, the status names. It imports nothing else of groupscope."""
