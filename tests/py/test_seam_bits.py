"""The backend seam changed no number (issue 24): the losses, gradient
norms, validation losses and the final checkpoint's and model file's bytes
of the demo config, of every dist.shard mode at 1, 2 and 4 ranks, with and
without recompute, and of a mixture run equal tests/seam_bits.json,
recorded from the commit before the seam's merge and, for the runs the
sharding strategies added, the commit before those (tests/py/seam_record.py
says how).

The record holds for the machine kind it was made on: the bits depend on
OpenBLAS's sgemm kernel and the vector width of the cloned loops. On
another kind this test skips, saying which; the dataset must also be the
one recorded (a changed tokenizer changes every number: re-record then,
with the base commit's weft on the new dataset)."""
import json
from pathlib import Path

import pytest

import seam_record
from conftest import tokenize_austen
from test_train_dist import WEFT

RECORD = Path(__file__).resolve().parents[1] / "seam_bits.json"


@pytest.fixture(scope="module")
def recorded():
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    return tokenize_austen(tmp_path_factory.mktemp("seam"), corpus_dir)


def test_runs_equal_the_record_bit_for_bit(recorded, dataset):
    here = seam_record.machine(WEFT)
    if here != recorded["machine"]:
        pytest.skip(f"recorded on {recorded['machine']}, this machine is {here}: its kernels sum in another order")
    assert seam_record.dataset_hash(dataset) == recorded["dataset"], \
        "the dataset differs from the recorded one (the tokenizer changed): re-record tests/seam_bits.json"
    now = seam_record.record(WEFT, dataset)["runs"]
    assert sorted(now) == sorted(recorded["runs"])
    bad = [f"{name}: {key}" for name, want in recorded["runs"].items() for key in want if now[name][key] != want[key]]
    assert not bad, "changed since the seam's base commit:\n" + "\n".join(bad)
