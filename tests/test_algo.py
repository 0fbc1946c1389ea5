"The algorithm's settings (`rl_notes.algo`): importable without torch, the tables handed out from `rl_notes.losses`, the old names found with a warning."
import subprocess, sys, warnings
import pytest


def test_the_settings_import_without_torch():
    code = ("import sys; from rl_notes.algo import Algo, get_algo, PRESETS; import rl_notes.trainconfig as t; "
            "assert t.Algo is Algo and t.PRESETS is PRESETS and t.get_algo is get_algo; print(sorted(PRESETS)[:2], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.endswith("False"), out


def test_the_tables_come_from_losses_without_a_warning():
    import rl_notes.algo as al, rl_notes.losses as lo
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in al.TABLES: assert getattr(al, name) is getattr(lo, name)
        from rl_notes.algo import register_policy_loss, POLICY_LOSSES   # the one-file path of a new loss
    assert register_policy_loss is lo.register_policy_loss and "clip" in POLICY_LOSSES


@pytest.mark.parametrize("name", ["Batch", "make_batch", "loss_clip", "EntropyBonus", "estimate_advantages"])
def test_moved_names_warn_and_resolve(name):
    import rl_notes.algo as al, rl_notes.losses as lo
    with pytest.warns(DeprecationWarning, match=f"rl_notes.losses.{name}"): got = getattr(al, name)
    assert got is getattr(lo, name)


def test_an_unknown_name_is_an_attribute_error():
    import rl_notes.algo as al
    with pytest.raises(AttributeError, match="no attribute 'nope'"): al.nope
    with pytest.raises(ImportError): exec("from rl_notes.algo import nope")
