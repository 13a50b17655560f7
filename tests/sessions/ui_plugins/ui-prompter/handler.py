def handle(ctx):
    return {}
