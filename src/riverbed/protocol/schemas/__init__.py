"""Generated schema tables and message classes (see scripts/gen_schemas.py)."""
