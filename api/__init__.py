"""semworld's HTTP service (FastAPI). Imports pipeline/, which imports models/."""
