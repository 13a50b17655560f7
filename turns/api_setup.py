"""HTTP endpoints (a ninja Router mounted at /api/ by covel.api)."""
from ninja import Router

router = Router()
