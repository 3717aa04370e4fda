"""What each operation means: one module per dialect family, registered in ``engine.SEMANTICS``."""
