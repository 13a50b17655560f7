"""Image flow providers: one too slow, one naming another plugin's runtimes, one good; and the
character.visual@1 slot values."""
import time


def slow(context):
    time.sleep(1.5)
    return {"entryRuntimeId": "ui-imager/prompt", "assetRuntimeIds": []}


def foreign(context):
    return {"entryRuntimeId": "teller/teller", "assetRuntimeIds": ["ui-imager/render"]}


def flow(context):
    return {"entryRuntimeId": "ui-imager/prompt", "assetRuntimeIds": ["ui-imager/render", "ui-imager/render"],
            "pluginId": "someone-else"}


def visuals(context):
    return {"items": [{"key": "hero", "value": {"image": "hero.png", "session": context["sessionId"]}}]}


def register(api):
    api.register_extension("media.image-flow@1", "slow", slow)
    api.register_extension("media.image-flow@1", "foreign", foreign)
    api.register_extension("media.image-flow@1", "flow", flow)
    api.register_extension("ui.slot@1", "visuals", visuals)
