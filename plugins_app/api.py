"""HTTP endpoints of this app (one ninja Router, mounted at /api/ by covel.api)."""
from ninja import Router

router = Router()
