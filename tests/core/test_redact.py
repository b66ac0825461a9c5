"""Secrets out of what dsbisect shows."""

from __future__ import annotations

import pytest

from dsbisect.core.redact import redact


@pytest.mark.parametrize("text, shown", [
    ("https://user:tok@host/simple", "https://***@host/simple"),
    ("pkg @ git+https://oauth2:glpat-x@gitlab.example/g/r.git@v1", "pkg @ git+https://***@gitlab.example/g/r.git@v1"),
    ("--index-url=https://__token__:pypi-abc@upload.example/simple", "--index-url=https://***@upload.example/simple"),
    # a scheme glued to the text before it (a line that is no requirement) is still a URL
    ("1.0https://u:p@h/x", "1.0https://***@h/x"),
    ("_https://u:p@h/x", "_https://***@h/x"),
    ("foo==1.0 ; https://h/x@y", "foo==1.0 ; https://h/x@y"),  # no userinfo: nothing to hide
    ("tokenizers==0.15.2", "tokenizers==0.15.2"),
    ("HF_TOKEN=hf_abc python train.py", "HF_TOKEN=*** python train.py"),
])
def test_redact(text, shown):
    assert redact(text) == shown
