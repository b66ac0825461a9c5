"""uv's resolver output read into one line, and what to do about a pin a kept package excludes."""

from __future__ import annotations

import pytest

from dsbisect.envs.uv import conflict_hint, reason

# uv 0.9's words when a 2024 freeze's typing-extensions meets the device's torch 2.11 (seen for real
# by `dsbisect prefetch --good-env`), and other forms of the same conflict.
TORCH_TE = ("  × No solution found when resolving dependencies:\n"
            "  ╰─▶ Because torch==2.11.0 depends on typing-extensions>=4.10.0 and you require torch==2.11.0, "
            "we can conclude that you require typing-extensions>=4.10.0.\n"
            "      And because you require typing-extensions==4.9.0, we can conclude that your requirements "
            "are unsatisfiable.\n")


@pytest.mark.parametrize("text, hint", [
    (TORCH_TE, "torch==2.11.0 needs typing-extensions>=4.10.0, which the pins exclude: with --good-env/--bad-env, "
               "--hold typing-extensions keeps the base's typing-extensions; else pin a typing-extensions that fits"),
    ("Because accelerate==0.30.0 depends on huggingface-hub<1.0,>=0.21 and you require accelerate==0.30.0, we can "
     "conclude that you require huggingface-hub>=0.21. And because you require huggingface-hub==0.20.2, we can "
     "conclude that your requirements are unsatisfiable.", "accelerate==0.30.0 needs huggingface-hub<1.0"),
    ("Because deepspeed==0.9.5 depends on pydantic<2.0.0 and you require deepspeed==0.9.5, we can conclude that "
     "you require pydantic<2.0.0. And because you require pydantic==2.3.0, we can conclude that your requirements "
     "are unsatisfiable.", "--hold pydantic"),
])
def test_a_pin_that_a_kept_package_excludes_gets_the_way_out(text, hint):
    assert hint in conflict_hint(text)
    assert hint in reason(text)


@pytest.mark.parametrize("text", [
    # no pin of the needed package: nothing to hold
    "Because torch==2.11.0 depends on typing-extensions>=4.10.0 and you require torch==2.11.0, we can conclude "
    "that you require typing-extensions>=4.10.0. And because there is no version of typing-extensions==9, …",
    "  × No solution found when resolving dependencies:\n  ╰─▶ Because there is no version of dsb-toy==9.9.9 …",
    "error: Failed to build `deepspeed==0.9.5`",
    "",
])
def test_other_failures_get_no_hint(text):
    assert conflict_hint(text) == ""
