"""weft.torch: weft's loader as a PyTorch dataset (PyTorch is optional for
the rest of the weft package; importing this module needs it)."""
import torch
import torch.utils.data

from ._loader import Loader


class LoaderDataset(torch.utils.data.IterableDataset):
    """weft.Loader as a torch.utils.data.IterableDataset. Each item is one
    batch, a (local_batch_size, seq_len + 1) int32 tensor that shares the
    memory of the loader's NumPy array (torch.from_numpy: no copy).

        ds = weft.torch.LoaderDataset("data", batch_size=32, seq_len=256)
        dl = torch.utils.data.DataLoader(ds, batch_size=None)   # no collation
        for step, batch in zip(range(steps), dl):
            x, y = batch[:, :-1], batch[:, 1:].long()
        ...
        saved = ds.state_dict()          # with the model's and optimizer's state
        ds.load_state_dict(saved)        # later, at any world size

    Arguments are those of weft.Loader; rank and world_size default to
    torch.distributed's when it is initialised (else 0 and 1). A mixture
    is sources=... (and weight_schedule=...) as for weft.Loader, with
    `dir` left out; with with_sources=True each item is the pair (tokens,
    sources), sources a (local_batch_size,) int32 tensor of each row's
    source index into ds.source_names:

        ds = weft.torch.LoaderDataset(sources=["web=data/web:0.7", "books=data/books:0.3"],
                                      batch_size=32, seq_len=256, with_sources=True)
        for step, (batch, src) in zip(range(steps), torch.utils.data.DataLoader(ds, batch_size=None)):
            ... Iteration
    never ends (epochs follow one another): bound it by steps. Use it with
    num_workers=0 (the default): weft's loader has its own prefetch thread,
    and worker processes would each read the same batches, so iterating in
    a DataLoader worker raises RuntimeError. With num_workers=0 the
    DataLoader asks for a batch only when the loop does, so state_dict()
    after a step is the cursor of the next step's batch.
    """

    def __init__(self, dir=None, batch_size=None, seq_len=None, rank=None, world_size=None, **loader_args):
        super().__init__()
        dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        if rank is None:
            rank = torch.distributed.get_rank() if dist else 0
        if world_size is None:
            world_size = torch.distributed.get_world_size() if dist else 1
        self.loader = Loader(dir, batch_size, seq_len, rank=rank, world_size=world_size, **loader_args)

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("weft.torch.LoaderDataset is iterated in a DataLoader worker process: use "
                               "num_workers=0 (weft's loader prefetches on its own thread; workers would "
                               "each read the same batches)")
        if self.loader.with_sources:
            for batch, src in self.loader:
                yield torch.from_numpy(batch), torch.from_numpy(src)
        else:
            for batch in self.loader:
                yield torch.from_numpy(batch)

    @property
    def source_names(self):
        """A mixture's source names, in the order of the source indexes."""
        return self.loader.source_names

    def state_dict(self):
        """The loader's cursor (weft.Loader.state_dict)."""
        return self.loader.state_dict()

    def load_state_dict(self, state):
        """Continues from a saved cursor (weft.Loader.load_state_dict)."""
        self.loader.load_state_dict(state)

    def __getstate__(self):
        raise TypeError("weft.torch.LoaderDataset cannot be pickled (it holds an open loader): use "
                        "num_workers=0 and save state_dict() instead")
