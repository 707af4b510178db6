"""Stand-in (tests only): the few names kvstore.integrations imports, signatures as in the real package."""
