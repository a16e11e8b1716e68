"""Process-wide JAX settings: importing the package changes none; our own calls get float64.

The import checks run in a fresh Python process each, so that no earlier import or fit in
the test session has touched JAX's configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import pytest

from bayes_scalerl.engine import runtime


def _env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    for name in ("JAX_ENABLE_X64", "JAX_COMPILATION_CACHE_DIR", runtime.CACHE_ENV):
        env.pop(name, None)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _child(code: str, **env: str | None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line, returned as a dict."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_IMPORT_CHILD = """
    import json
    import jax
    x64_before = bool(jax.config.jax_enable_x64)
    import jax.numpy as jnp
    import bayes_scalerl as bs
    from bayes_scalerl.engine import runtime

    @runtime.x64
    def ours():
        return str(jnp.ones(1).dtype)

    info = {
        "x64_before": x64_before,
        "x64_after_import": bool(jax.config.jax_enable_x64),
        "user_dtype": str(jnp.ones(1).dtype),
        "user_sum_dtype": str((jnp.ones(3, dtype=jnp.float32) * 2.5).sum().dtype),
        "cache_after_import": runtime.compilation_cache_dir(),
        "jax_cache_dir_after_import": jax.config.jax_compilation_cache_dir,
        "ours": ours(),
        "user_dtype_after": str(jnp.ones(1).dtype),
        "cache_after_ensure": runtime.ensure_compilation_cache(),
    }
    print(json.dumps(info))
"""


def test_import_leaves_x64_off_and_float32_code_float32(tmp_path):
    """Fails until ``jax.config.update("jax_enable_x64", True)`` is gone from ``__init__.py``."""
    info = _child(_IMPORT_CHILD, **{runtime.CACHE_ENV: str(tmp_path / "cache")})
    assert info["x64_before"] is False
    assert info["x64_after_import"] is False
    assert info["user_dtype"] == "float32" and info["user_sum_dtype"] == "float32"
    assert info["ours"] == "float64"  # our own call ran in float64 ...
    assert info["user_dtype_after"] == "float32"  # ... and the user's mode is back


def test_import_does_not_configure_the_compilation_cache(tmp_path):
    """Fails until ``inference.py`` no longer configures the cache when it is imported."""
    folder = str(tmp_path / "cache")
    info = _child(_IMPORT_CHILD, **{runtime.CACHE_ENV: folder})
    assert info["cache_after_import"] is None and not info["jax_cache_dir_after_import"]
    # the first fit (here: its first step) switches it on, into the folder asked for
    assert info["cache_after_ensure"] == folder


_ENSURE_CHILD = """
    import json
    from bayes_scalerl.engine import runtime
    {before}
    first = runtime.ensure_compilation_cache()
    import os
    os.environ[runtime.CACHE_ENV] = "/nonexistent/elsewhere"
    second = runtime.ensure_compilation_cache()  # decided once: the variable is not read again
    now = runtime.compilation_cache_dir()
    import bayes_scalerl as bs
    devices = bs.use_all_cpu_cores(3)  # JAX's backends were not started by any of it
    print(json.dumps({{"first": first, "second": second, "now": now, "devices": devices}}))
"""


@pytest.mark.parametrize(
    "case",
    ["env folder", "env empty", "jax env folder", "default folder", "explicit call first"],
)
def test_ensure_compilation_cache_rules(tmp_path, case):
    own, jax_own, xdg = str(tmp_path / "ours"), str(tmp_path / "jax-own"), str(tmp_path / "xdg")
    before = ""
    if case == "env folder":
        env, expected = {runtime.CACHE_ENV: own}, own
    elif case == "env empty":  # leaves JAX alone: its cache stays off
        env, expected = {runtime.CACHE_ENV: ""}, None
    elif case == "jax env folder":  # the user's own JAX setting is respected
        env, expected = {"JAX_COMPILATION_CACHE_DIR": jax_own}, jax_own
    elif case == "default folder":
        env, expected = {"XDG_CACHE_HOME": xdg}, os.path.join(xdg, "bayes_scalerl", "jax")
    else:  # an explicit set_compilation_cache wins over the environment
        env, expected = {runtime.CACHE_ENV: own}, None
        before = "runtime.set_compilation_cache(None)"
    info = _child(_ENSURE_CHILD.format(before=before), **env)
    assert info == {"first": expected, "second": expected, "now": expected, "devices": 3}


def test_x64_applies_inside_only():
    """In this process (whatever the global mode), ``x64`` turns float64 on and restores the mode."""

    @runtime.x64
    def ours(n):
        return jnp.ones(n).dtype

    with runtime._enable_x64(False):
        assert jnp.ones(1).dtype == jnp.float32
        assert ours(2) == jnp.float64
        with runtime.x64():
            assert jnp.ones(1).dtype == jnp.float64
            with runtime.x64():  # nested
                assert jnp.zeros(1).dtype == jnp.float64
            assert jnp.ones(1).dtype == jnp.float64
        assert jnp.ones(1).dtype == jnp.float32
        assert ours.__name__ == "ours"

        @runtime.x64()
        def also_ours():
            return jnp.arange(3.0).dtype

        assert also_ours() == jnp.float64
        assert jnp.ones(1).dtype == jnp.float32


def test_x64_restores_the_mode_after_an_exception():
    @runtime.x64
    def fails():
        raise RuntimeError("boom")

    with runtime._enable_x64(False):
        with pytest.raises(RuntimeError, match="boom"):
            fails()
        assert jnp.ones(1).dtype == jnp.float32
    with pytest.raises(TypeError):
        runtime.x64(3)


def test_set_compilation_cache_on_and_off(tmp_path, monkeypatch):
    monkeypatch.setitem(runtime._CACHE_STATE, "decided", runtime._CACHE_STATE["decided"])
    before = runtime.compilation_cache_dir()
    try:
        assert runtime.set_compilation_cache(None) is None
        assert runtime.compilation_cache_dir() is None
        assert runtime.set_compilation_cache(tmp_path) == str(tmp_path)
        assert runtime.compilation_cache_dir() == str(tmp_path)
    finally:
        runtime.set_compilation_cache(before)
