def run(ctx):
    return {}
