"""One module per real system; the core is fed through these."""
