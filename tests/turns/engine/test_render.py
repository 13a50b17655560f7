from turns.engine.render import player_input_render

SEATS = [{"id": "main", "controller": "human", "role": "player", "characters": "auto"}]


def test_single_player_say_is_kept_verbatim():
    out = player_input_render([{"kind": "say", "text": "我拔出剑"}, {"kind": "command", "text": "/look"}], locale="zh-CN",
                              seats=SEATS, characters={"hero": "Ada"}, player_character_ids=["hero"])
    assert out.rendered == "我拔出剑\n/look" and out.content == "我拔出剑\n/look"


def test_other_kinds_are_labelled_with_character_and_kind_names():
    actions = [{"kind": "act", "text": "推开门。"}, {"kind": "narrate", "text": "雨下起来了。"}]
    out = player_input_render(actions, locale="zh-CN", seats=SEATS, characters={"hero": "Ada"}, player_character_ids=["hero"])
    assert out.rendered == "【Ada·行动】推开门。\n【旁白】雨下起来了。"
    assert out.content == "推开门。\n雨下起来了。"


def test_english_labels_and_plugin_kind_fields():
    kinds = {"magic/cast": {"name": "cast", "display": {"label": {"en": "Cast", "zh": "施法"}}}}
    actions = [{"kind": "magic/cast", "fields": {"spell": "light"}}]
    out = player_input_render(actions, locale="en-US", seats=SEATS, characters={"hero": "Hero"}, player_character_ids=["hero"],
                              plugin_kinds=kinds)
    assert out.rendered == '[Hero · Cast] {"spell":"light"}'
    assert out.content == out.rendered


def test_prompt_placeholders_outside_our_namespaces_stay_literal():
    from turns.engine.prompt import template_fill

    text, used = template_fill(
        "World: {{ world.name }}\nThe form text must contain `{{characterName}}`.",
        {"world": {"name": "Hollow Reach"}},
    )
    assert text == "World: Hollow Reach\nThe form text must contain `{{characterName}}`."
    assert "world.name" in used
