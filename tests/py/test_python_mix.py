"""The weft Python package's loader over a mixture of datasets
(weft.Loader(sources=...), weft.torch.LoaderDataset; docs/python.md,
docs/loader.md "Dataset mixing"): two datasets made from different Austen
novels with one tokenizer.

- Batches: every batch (tokens, each row's source and its position in its
  source's order, the global batch's count per source, the weights) equals
  what `weft data batch --sources --ids` prints for the same options, at
  several ranks and world sizes, across a weight change.
- Independently of weft: the source of every slot is the schedule of
  docs/loader.md computed in Python (tests/py/test_train_mix.py's
  reference), every row's tokens are a sample of the source it is said to
  come from (looked up among the samples of both datasets, read from their
  shards with a reader written from docs/formats/token-shard.md), and each
  source's positions go 0, 1, 2, ... in slot order.
- Elastic resume: 4 ranks stop, 2 ranks resume from the state_dict (through
  JSON) across a weight change, and the tokens and sources equal one
  uninterrupted process's; set_weights equals a weight_schedule item; a
  `weft train` run's checkpoint (state["mix"]) resumes in Python with the
  token ids the trainer read after it (WEFT_TEST_DATA_DUMP).
- Bad inputs (unknown directory, bad weight, another tokenizer, mismatched
  states) raise weft's errors with weft's message.
"""
import json
import re

import numpy as np
import pytest

from conftest import run_weft_cmd
from test_train_mix import expected_sources, read_stream, token_rows

SOURCES = ["pp:0.7", "emma:0.3"]


@pytest.fixture(scope="module")
def mix(tmp_path_factory, corpus_dir):
    """pp and emma (twelve chapters each, vocabulary 512, one tokenizer),
    and `other`, Persuasion tokenized with another tokenizer of the same
    vocabulary size."""
    d = tmp_path_factory.mktemp("pymix")
    pp = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    emma = sorted(corpus_dir.glob("emma-*.txt"))[:12]
    pers = sorted(corpus_dir.glob("persuasion-*.txt"))[:6]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + pp[:6] + emma[:6])
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "other.json"] + pers)
    for name, tok, inputs in (("pp", "tok.json", pp), ("emma", "tok.json", emma), ("other", "other.json", pers)):
        run_weft_cmd(["tokenize", "--tokenizer", d / tok, "--output", d / name, "--val-fraction", 0.2, "--seed", 3]
                     + inputs)
    return d


def srcs(d, sources=SOURCES):
    return [str(d / s) if "=" not in s else s.split("=")[0] + "=" + str(d / s.split("=")[1]) for s in sources]


def cli_mix_batch(d, batch, seq_len, step, rank=0, world=1, seed=0, schedule=(), sources=SOURCES):
    """What `weft data batch --sources --ids` prints: the rows, each row's
    (source name, position in its source's order), the global batch's
    counts by name, and the weights line."""
    a = ["data", "batch", "--sources", ",".join(srcs(d, sources)), "--ids", "--batch", batch, "--seq-len", seq_len,
         "--step", step, "--rank", rank, "--world-size", world, "--seed", seed]
    if schedule:
        a += ["--weight-schedule", ",".join(schedule)]
    lines = run_weft_cmd(a).stdout.splitlines()
    rows, where = [], []
    for i, line in enumerate(lines):
        m = re.match(r"--- sample \d+: source (\S+), position (\d+) of its epoch (\d+) \((\d+) samples an epoch\)",
                     line)
        if m:
            rows.append(list(map(int, lines[i + 1].split())))
            where.append((m[1], int(m[3]) * int(m[4]) + int(m[2])))
    counts = dict(re.findall(r"(\S+) (\d+)", re.search(r"^global batch: (.*) samples$", "\n".join(lines), re.M)[1]))
    weights = re.search(r"^weights: (.*)$", "\n".join(lines), re.M)[1]
    return np.array(rows, dtype=np.int32), where, {k: int(v) for k, v in counts.items()}, weights


# -------------------------------------------------------------------- batches


@pytest.mark.parametrize("batch,seq_len,world,rank,seed,schedule", [
    (4, 16, 1, 0, 0, ["3: 0.2 0.8"]),
    (8, 32, 2, 1, 7, ["2: 1 0", "4: 0.5 0.5"]),
    (6, 20, 3, 2, 11, []),
])
def test_mixed_batches_equal_weft_data_batch(weft, mix, batch, seq_len, world, rank, seed, schedule):
    loader = weft.Loader(sources=srcs(mix), weight_schedule=schedule or None, batch_size=batch, seq_len=seq_len,
                         rank=rank, world_size=world, seed=seed, with_sources=True)
    assert loader.is_mixture and loader.source_names == ("pp", "emma")
    got = []
    for _ in range(6):
        tokens, sources = next(loader)
        assert tokens.shape == (batch // world, seq_len + 1) and tokens.dtype == np.int32 and tokens.flags.writeable
        assert sources.shape == (batch // world,) and sources.dtype == np.int32
        assert sources is loader.last_sources
        got.append((tokens, sources, loader.last_positions, loader.last_counts, loader.last_state))
    for step, (tokens, sources, positions, counts, state) in enumerate(got):
        rows, where, want_counts, weights = cli_mix_batch(mix, batch, seq_len, step, rank, world, seed, schedule)
        assert np.array_equal(tokens, rows), f"step {step}: tokens"
        assert [(loader.source_names[k], int(p)) for k, p in zip(sources, positions)] == where, f"step {step}"
        assert dict(zip(loader.source_names, counts.tolist())) == want_counts
        w = state["weights"]
        assert weights == ", ".join(f"{n} {x / sum(w):.6g}" for n, x in zip(loader.source_names, w))
        assert state["slot"] == step * batch
    loader.close()


def test_sources_follow_the_documented_schedule(weft, mix):
    """Independent of weft: the slots' sources are the Python reference's
    schedule, each row is a sample of its source's own tokens, and each
    source is read at positions 0, 1, 2, ... in slot order."""
    G, T, steps = 8, 32, 12
    schedule = ["6: 0.2 0.8", "9: 0.5 0.5"]
    samples = {}
    for k, name in enumerate(("pp", "emma")):
        s = read_stream(mix / name)
        for i in range((len(s) - 1) // T):
            samples[tuple(s[i * T:i * T + T + 1])] = k
    loader = weft.Loader(sources=srcs(mix), weight_schedule=schedule, batch_size=G, seq_len=T, seed=4)
    got_src, got_pos, weights = [], [], []
    for _ in range(steps):
        tokens = next(loader)
        for row, k in zip(tokens, loader.last_sources):
            assert samples.get(tuple(int(x) for x in row)) == k, "a row is not a sample of the source it names"
        got_src += loader.last_sources.tolist()
        got_pos += loader.last_positions.tolist()
        weights.append(loader.last_state["weights"])
    want, per_step = expected_sources(steps, schedule=schedule, sources=SOURCES, g=G)
    assert got_src == want
    assert weights == per_step
    for k in (0, 1):
        assert [p for s, p in zip(got_src, got_pos) if s == k] == list(range(got_src.count(k)))


def global_batches(weft, d, world, n, state=None, **kw):
    """n global batches (tokens and sources, ranks concatenated) read by
    `world` loaders, and each rank's state_dict after them."""
    loaders = [weft.Loader(sources=srcs(d), rank=r, world_size=world, with_sources=True, **kw) for r in range(world)]
    if state is not None:
        for ld in loaders:
            ld.load_state_dict(state)
    out = []
    for _ in range(n):
        parts = [next(ld) for ld in loaders]
        out.append((np.concatenate([t for t, _ in parts]), np.concatenate([s for _, s in parts])))
    states = [ld.state_dict() for ld in loaders]
    for ld in loaders:
        ld.close()
    return out, states


def test_stop_at_4_ranks_resume_at_2_across_a_weight_change(weft, mix):
    kw = dict(batch_size=8, seq_len=64, seed=5, weight_schedule=["7: 0.1 0.9"])
    want, _ = global_batches(weft, mix, 1, 14, **kw)
    first, states = global_batches(weft, mix, 4, 5, **kw)
    assert all(s == states[0] for s in states), "ranks disagree on the cursor"
    assert states[0]["slot"] == 5 * 8 and sum(states[0]["taken"]) == 40
    saved = json.loads(json.dumps(states[0]))  # what a checkpoint would store
    rest, states2 = global_batches(weft, mix, 2, 4, state=saved, **kw)
    last, _ = global_batches(weft, mix, 1, 5, state=states2[0], **kw)  # and at 1
    got = first + rest + last
    assert len(got) == len(want)
    for step, ((a, sa), (b, sb)) in enumerate(zip(got, want)):
        assert np.array_equal(a, b) and np.array_equal(sa, sb), f"global batch {step} differs after 4 -> 2 -> 1"
    assert states2[0]["weights"] == [1, 9] and states2[0]["segment_slot"] == 6 * 8


def test_set_weights_is_a_schedule_item(weft, mix):
    kw = dict(batch_size=4, seq_len=16, seed=2)
    a = weft.Loader(sources=srcs(mix), weight_schedule=[(3, [0.25, 0.75])], **kw)
    b = weft.Loader(sources=srcs(mix), **kw)
    c = weft.Loader(sources=srcs(mix), **kw)
    b.set_weights({"emma": "0.75", "pp": 0.25}, step=3)
    assert b.weight_schedule == [(3, {"pp": 0.25, "emma": 0.75})]
    for step in range(6):
        if step == 2:
            assert c.next_step == 3 and c.weights == {"pp": 0.7, "emma": 0.3}
            c.set_weights([1, 3])  # from the next batch on
            assert c.weights == {"pp": 0.25, "emma": 0.75}
            with pytest.raises(ValueError, match="step 2 is before the next batch's"):
                c.set_weights([1, 1], step=2)
        ta, tb, tc = next(a), next(b), next(c)
        assert np.array_equal(ta, tb) and np.array_equal(ta, tc), f"step {step}"
        assert a.last_state == b.last_state == c.last_state
        rows, _, _, _ = cli_mix_batch(mix, 4, 16, step, seed=2, schedule=["3: 1 3"])
        assert np.array_equal(ta, rows)
    assert a.state_dict()["weights"] == [1, 3]


def test_other_sources_on_resume_keep_their_cursors_by_name(weft, mix):
    kw = dict(batch_size=4, seq_len=16)
    ld = weft.Loader(sources=srcs(mix), **kw)
    for _ in range(3):
        next(ld)
    saved = ld.state_dict()
    other = weft.Loader(sources=srcs(mix, ["emma:1", "book=pp:1"]), **kw)
    with pytest.warns(UserWarning, match="the sources of both \\(by name\\) go on where they were"):
        other.load_state_dict(saved)
    st = other.state_dict()
    assert st["slot"] == 12 and st["taken"] == [saved["taken"][1], 0] and st["weights"] == [1, 1]
    next(other)
    pos = {k: other.last_positions[other.last_sources == k].tolist() for k in (0, 1)}
    assert pos[0] == list(range(saved["taken"][1], saved["taken"][1] + len(pos[0]))) and pos[1] == [0, 1]


# ------------------------------------------------------- a weft train run


def test_resume_from_a_weft_train_checkpoint(weft, mix, tmp_path):
    """weft train stops after step 3 (of global batches of 8 sequences, a
    weight change at step 5); a Python loader given the checkpoint's
    state["mix"] reads the token ids the trainer read in steps 4 to 7."""
    B, T, G, steps = 4, 32, 8, 7
    run, dump = tmp_path / "run", tmp_path / "dump"
    schedule = ["5: 0.2 0.8"]
    run_weft_cmd(["train", "--run-dir", run, "--preset", "tiny", "--steps", steps, "--batch-size", B, "--seq-len", T,
                  "--threads", 1, f"--data.global_batch_tokens={G * T}", "--data.seed=9", "--ckpt.every=3",
                  "--ckpt.keep_last=0", "--data.sources=" + ",".join(srcs(mix)),
                  "--data.weight_schedule=" + ",".join(schedule), "--metrics.flush_every_s=0"],
                 env={"WEFT_TEST_DATA_DUMP": str(dump)})
    trained = token_rows(dump, 1)
    ckpt = weft.Checkpoint(run / "checkpoints" / "step-0000003")
    assert ckpt.step == 3 and ckpt.state["mix"]["sources"] == "pp emma"
    ld = weft.Loader(sources=srcs(mix), weight_schedule=schedule, batch_size=G, seq_len=T,
                     seed=ckpt.state["rng"]["data_seed"])
    ld.load_state_dict(ckpt.state["mix"])
    for step in range(4, steps + 1):
        tokens = next(ld)
        assert [tuple(r) for r in tokens[:, :T].tolist()] == trained[step], f"step {step}"
    assert ld.state_dict()["weights"] == [1, 4]


# -------------------------------------------------------------------- PyTorch


def test_torch_dataset_yields_tokens_and_sources_without_copies(weft, mix):
    import torch
    import weft.torch as wt

    arrays = []

    class Spy(weft.Loader):
        def next_batch(self, with_sources=None):
            arrays.append(super().next_batch(with_sources))
            return arrays[-1]

    ds = wt.LoaderDataset(sources=srcs(mix), batch_size=4, seq_len=16, with_sources=True)
    assert ds.source_names == ("pp", "emma")
    ds.loader = Spy(sources=srcs(mix), batch_size=4, seq_len=16, with_sources=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    for step, (t, s) in zip(range(3), dl):
        assert t.dtype == torch.int32 and t.shape == (4, 17) and s.dtype == torch.int32 and s.shape == (4,)
        tokens, sources = arrays[-1]
        assert t.data_ptr() == tokens.__array_interface__["data"][0], "the batch was copied on its way to torch"
        assert s.data_ptr() == sources.__array_interface__["data"][0]
    rows, where, _, _ = cli_mix_batch(mix, 4, 16, 2)
    assert np.array_equal(t.numpy(), rows) and [ds.source_names[k] for k in s.tolist()] == [n for n, _ in where]
    saved = ds.state_dict()
    assert saved["slot"] == 12
    ds2 = wt.LoaderDataset(sources=srcs(mix), batch_size=4, seq_len=16, world_size=2, rank=1)
    ds2.load_state_dict(saved)
    t2 = next(iter(ds2))
    assert np.array_equal(t2.numpy(), cli_mix_batch(mix, 4, 16, 3, rank=1, world=2)[0])


# ---------------------------------------------------------------- bad inputs


def cli_error(d, sources):
    r = run_weft_cmd(["data", "batch", "--sources", ",".join(sources), "--ids", "--batch", 4, "--seq-len", 16],
                     check=False)
    assert r.returncode != 0
    return r.stderr.strip().split("error: ", 1)[1]


def test_bad_mixtures_raise_weft_errors(weft, mix, tmp_path):
    kw = dict(batch_size=4, seq_len=16)
    with pytest.raises(weft.NotFoundError, match="sources: source 'nodir': .*nodir: no such dataset directory"):
        weft.Loader(sources=[str(mix / "pp") + ":1", str(tmp_path / "nodir") + ":1"], **kw)
    with pytest.raises(weft.ConfigError, match="sources: weight 1 is 'x'"):
        weft.Loader(sources=srcs(mix, ["pp:x", "emma:1"]), **kw)
    with pytest.raises(weft.ConfigError, match="sources: every weight is 0"):
        weft.Loader(sources=[("pp", mix / "pp", 0), ("emma", mix / "emma", 0)], **kw)
    with pytest.raises(weft.ConfigError, match="sources items 1 and 2 are both named 'a'"):
        weft.Loader(sources=srcs(mix, ["a=pp:1", "a=emma:1"]), **kw)
    with pytest.raises(weft.ConfigError, match="weight_schedule item 1 '3: 1': 1 weight for 2 sources"):
        weft.Loader(sources=srcs(mix), weight_schedule=["3: 1"], **kw)
    with pytest.raises(TypeError, match="not both"):
        weft.Loader(mix / "pp", sources=srcs(mix), **kw)
    with pytest.raises(TypeError, match="one text"):
        weft.Loader(sources=str(mix / "pp") + ":1", **kw)

    # another tokenizer of the same vocabulary size: weft's message, as the CLI says it
    other = srcs(mix, ["pp:0.5", "other:0.5"])
    with pytest.raises(weft.ConfigError, match="was tokenized with another tokenizer than source 'pp'") as e:
        weft.Loader(sources=other, **kw)
    assert str(e.value) == cli_error(mix, other).replace("--sources: ", "sources: ", 1)
    assert "source 'other' (" in str(e.value) and "tokenizer fingerprints" in str(e.value)


def test_bad_states_and_calls_raise(weft, mix):
    kw = dict(batch_size=4, seq_len=16)
    ld = weft.Loader(sources=srcs(mix), **kw)
    with pytest.raises(ValueError, match="cursor of one dataset"):
        ld.load_state_dict({"epoch": 0, "sample": 8})
    with pytest.raises(ValueError, match="seq_len=32"):
        ld.load_state_dict({**ld.state_dict(), "seq_len": 32})
    bad = {**ld.state_dict(), "slot": 5}  # the counts do not add up to the slot
    with pytest.raises(weft.FormatError, match="loader state"):
        ld.load_state_dict(bad)
    with pytest.raises(ValueError, match="the mixture has 2 sources"):
        ld.load_state_dict({**ld.state_dict(), "weights": [1, 2, 3]})
    with pytest.raises(weft.ConfigError, match="set_weights: 3 weights for a mixture of 2 sources"):
        ld.set_weights([1, 2, 3])
    with pytest.raises(KeyError, match="missing: emma"):
        ld.set_weights({"pp": 1})
    with pytest.raises(weft.ConfigError, match="set_weights: every weight is 0"):
        ld.set_weights([0, 0])
    single = weft.Loader(mix / "pp", **kw)
    with pytest.raises(ValueError, match="a mixture's cursor"):
        single.load_state_dict(ld.state_dict())
    with pytest.raises(TypeError, match="only a mixture"):
        single.next_batch(with_sources=True)
    with pytest.raises(TypeError, match="only a mixture"):
        single.set_weights([1])
    ld.close()
    single.close()
