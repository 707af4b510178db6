"""Adapters for existing inference-engine integrations (they import kvstore, never the reverse)."""
