"""The answer evaluation's output checks: what an LLM would have to guess around."""

from __future__ import annotations

from eval.output_checks import count_defects, hit_defects

HEAD = "## [1] Source: https://docs.example/a\nPage › Section · score 0.9\n\n"


def test_a_clean_hit_passes_every_check() -> None:
    block = HEAD + "### Section\nText.\n```python\n### not a heading in code\n```\n1. Step one."
    assert hit_defects(block.removeprefix("## [1] ")) == set()


def test_each_defect_is_found() -> None:
    mid = HEAD + "```\ncode\n```\n### Section\nProse after the code."
    assert hit_defects(mid.removeprefix("## [1] ")) == {"heading_below_top"}
    bare = HEAD + "### Struct\n3. Only native.\n4.\n4. For the 'f' code."
    assert hit_defects(bare.removeprefix("## [1] ")) == {"bare_item_number"}
    open_fence = HEAD + "Run:\n```\napt update\n```\n```\nUsers then choose."
    assert hit_defects(open_fence.removeprefix("## [1] ")) == {"unclosed_fence"}
    in_list = HEAD + "- Run:\n- ```\napt update\n```\n```\n> | a | b |"
    assert hit_defects(in_list.removeprefix("## [1] ")) == {"behind_marker"}
    nested = HEAD + "> > | a | b |\n- > ```python"
    assert hit_defects(nested.removeprefix("## [1] ")) == {"behind_marker"}


def test_a_step_whose_text_is_its_code_is_not_a_bare_number() -> None:
    step = HEAD + "1. Build:\n2.\n```\nmake install\n```\n3.\n| A | B |\n| --- | --- |"
    assert hit_defects(step.removeprefix("## [1] ")) == set()


def test_counts_are_per_hit_over_all_outputs() -> None:
    two = HEAD + "### A\ntext\n### A\nagain\n\n" + HEAD.replace("[1]", "[2]") + "ok"
    counts = count_defects([two, HEAD + "4."])
    assert counts == {
        "hits": 3,
        "with_any": 2,
        "heading_below_top": 1,
        "unclosed_fence": 0,
        "behind_marker": 0,
        "bare_item_number": 1,
    }
