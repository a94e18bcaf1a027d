"""`gpuspan.torch.model_bytes`, the source of a step's `ml.params.bytes`, `ml.grads.bytes`
and `ml.optimizer_state.bytes`, counts the memory the tensors hold, each byte once: views
into one buffer (DDP's gradient buckets, FSDP's flat parameters) count the bytes they cover,
however many views there are; a strided view counts the bytes from its first element to its
last; sparse tensors their indices and values; a DTensor the shard this rank holds; a
tensor on the meta device nothing."""

import json

import pytest
import torch
from conftest import clean_env, run_python

from gpuspan.torch import GRADS, OPTIMIZER_STATE, PARAMS, model_bytes

FLOAT = 4


def figures(params, grads=None):
    """The figures for an SGD optimizer over ``params``, with ``grads`` set on them."""
    params = [torch.nn.Parameter(p, requires_grad=True) if not isinstance(p, torch.nn.Parameter)
              else p for p in params]
    for param, grad in zip(params, grads or ()):
        param.grad = grad
    return model_bytes(torch.optim.SGD(params, lr=0.1))


def test_two_halves_of_one_buffer_count_the_whole_buffer():
    params, grads = torch.zeros(200), torch.zeros(200)
    got = figures([params[:100], params[100:]], [grads[:100], grads[100:]])
    assert got[PARAMS] == 200 * FLOAT
    assert got[GRADS] == 200 * FLOAT


def test_overlapping_views_count_their_union():
    buffer = torch.zeros(100)
    # Elements 0..59 and 40..99: together the whole buffer, 20 elements in both.
    got = figures([buffer[:60], buffer[40:]])
    assert got[PARAMS] == 100 * FLOAT


def test_a_view_and_its_base_count_the_base():
    base = torch.zeros(100)
    got = figures([base, base[10:20]])
    assert got[PARAMS] == 100 * FLOAT
    got = figures([base[10:20], base])
    assert got[PARAMS] == 100 * FLOAT


def test_views_of_different_buffers_all_count():
    one, two = torch.zeros(50), torch.zeros(30)
    got = figures([one[:25], two[:10], one[25:]])
    assert got[PARAMS] == (50 + 10) * FLOAT


def test_a_strided_view_counts_the_range_from_its_first_element_to_its_last():
    grid = torch.zeros(100).view(10, 10)
    # The first two columns: elements 0, 1, 10, 11, ..., 90, 91; the range spans 0..91.
    columns = grid[:, :2]
    assert not columns.is_contiguous()
    assert figures([columns])[PARAMS] == 92 * FLOAT
    # Columns 5 and 6 span elements 5..96; with the first two, 0..96.
    assert figures([columns, grid[:, 5:7]])[PARAMS] == 97 * FLOAT


def test_an_expanded_tensor_counts_the_one_element_it_holds():
    # 100 elements that all read the same float (stride 0).
    expanded = torch.zeros(1).expand(100)
    assert figures([torch.zeros(100)], [expanded])[GRADS] == FLOAT


def test_parameters_without_gradients_count_no_gradient_bytes():
    used, frozen = torch.zeros(30), torch.zeros(70)
    got = figures([used, frozen], [torch.zeros(30), None])
    assert got[PARAMS] == 100 * FLOAT
    assert got[GRADS] == 30 * FLOAT


def test_memory_shared_by_parameters_and_gradients_counts_in_each_figure():
    param = torch.nn.Parameter(torch.zeros(50))
    param.grad = param.detach()
    got = figures([param])
    assert got[PARAMS] == 50 * FLOAT
    assert got[GRADS] == 50 * FLOAT


def test_empty_tensors_count_nothing():
    got = figures([torch.zeros(0), torch.zeros(5)], [torch.zeros(0), torch.zeros(5)])
    assert got[PARAMS] == 5 * FLOAT
    assert got[GRADS] == 5 * FLOAT


def test_parameters_on_the_meta_device_hold_no_memory():
    model = torch.nn.Linear(16, 8, device="meta")
    got = model_bytes(torch.optim.SGD(model.parameters(), lr=0.1))
    assert got == {PARAMS: 0, GRADS: 0, OPTIMIZER_STATE: 0}


def test_sparse_gradients_count_their_indices_and_values():
    embedding = torch.nn.Embedding(1000, 4, sparse=True)
    optimizer = torch.optim.SGD(embedding.parameters(), lr=0.1)
    # Five lookups: an uncoalesced sparse gradient of five rows, each with its index.
    embedding(torch.tensor([1, 2, 2, 5, 1])).sum().backward()
    got = model_bytes(optimizer)
    assert got[PARAMS] == 1000 * 4 * FLOAT
    assert got[GRADS] == 5 * 8 + 5 * 4 * FLOAT


def test_optimizer_state_in_one_flat_buffer_counts_once():
    param = torch.nn.Parameter(torch.zeros(10))
    optimizer = torch.optim.SGD([param], lr=0.1)
    flat = torch.zeros(40)
    optimizer.state[param] = {"exp_avg": flat[:20], "exp_avg_sq": flat[20:]}
    assert model_bytes(optimizer)[OPTIMIZER_STATE] == 40 * FLOAT


DDP_BUCKET_VIEWS = """
import json, os, torch, torch.distributed as dist

dist.init_process_group("gloo", init_method="file://" + os.path.abspath("store"),
                        rank=0, world_size=1)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)),
    gradient_as_bucket_view=True,
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 16)).sum().backward()
from gpuspan.torch import model_bytes
params = list(model.parameters())
print(json.dumps({
    "figures": model_bytes(optimizer),
    "param_bytes": sum(p.numel() * p.element_size() for p in params),
    "grad_storages": len({p.grad.untyped_storage().data_ptr() for p in params}),
    "grads": len(params),
}))
dist.destroy_process_group()
"""


def test_ddp_gradients_that_are_views_of_one_bucket_count_every_gradient(tmp_path):
    proc = run_python(DDP_BUCKET_VIEWS, tmp_path, clean_env(OMP_NUM_THREADS=1))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The four gradients live in one bucket: this is the case being tested.
    assert out["grads"] == 4 and out["grad_storages"] == 1
    assert out["figures"][PARAMS] == out["param_bytes"]
    assert out["figures"][GRADS] == out["param_bytes"]


DTENSOR_SHARDS = """
import json, torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

# A world of four ranks, of which this process is rank 0, with no communication.
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

mesh = init_device_mesh("cpu", (4,))
param = torch.nn.Parameter(distribute_tensor(torch.zeros(64, 8), mesh, [Shard(0)]))
param.grad = distribute_tensor(torch.zeros(64, 8), mesh, [Shard(0)])
from gpuspan.torch import model_bytes
print(json.dumps({
    "figures": model_bytes(torch.optim.SGD([param], lr=0.1)),
    "local_rows": param.to_local().shape[0],
}))
dist.destroy_process_group()
"""


def test_a_dtensor_counts_the_shard_this_rank_holds(tmp_path):
    proc = run_python(DTENSOR_SHARDS, tmp_path, clean_env(OMP_NUM_THREADS=1))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["local_rows"] == 16
    assert out["figures"][PARAMS] == 16 * 8 * FLOAT
    assert out["figures"][GRADS] == 16 * 8 * FLOAT


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_compressed_sparse_parameters_count_their_index_and_value_arrays(layout):
    dense = torch.zeros(10, 10)
    dense[1, 2] = dense[3, 4] = dense[5, 6] = 1.0
    sparse = dense.to_sparse_csr() if layout == "csr" else dense.to_sparse_csc()
    got = figures([torch.nn.Parameter(sparse)])
    # 11 compressed offsets and 3 indices (int64), 3 values.
    assert got[PARAMS] == 11 * 8 + 3 * 8 + 3 * FLOAT


class Unreadable(torch.Tensor):
    """A tensor subclass that wraps another but cannot say which (its flattening fails)."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

    def __init__(self, inner):
        self.inner = inner

    def __tensor_flatten__(self):
        raise RuntimeError("cannot say")

    @staticmethod
    def __tensor_unflatten__(inner, meta, size, stride):
        return Unreadable(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(func)


def test_a_tensor_whose_memory_cannot_be_read_counts_its_elements_and_spoils_nothing():
    # The figures are read inside the optimizer's step hook: an error there would cost the
    # program its step spans.
    class Optimizer:
        param_groups = [{"params": [torch.zeros(25), Unreadable(torch.zeros(10))]}]
        state = {}

    assert model_bytes(Optimizer())[PARAMS] == (25 + 10) * FLOAT


def test_state_kept_in_lists_counts_every_tensor_in_them():
    # LBFGS keeps its history (directions, steps, their products) in lists of tensors: the
    # bulk of its state.
    torch.manual_seed(0)
    model = torch.nn.Linear(100, 100)
    optimizer = torch.optim.LBFGS(model.parameters(), history_size=10, max_iter=5)
    inputs = torch.randn(8, 100)

    def closure():
        optimizer.zero_grad()
        loss = model(inputs).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(3):
        optimizer.step(closure)
    (state,) = optimizer.state.values()
    history = state["old_dirs"] + state["old_stps"]
    assert len(history) >= 2, "the history holds directions and steps"
    tensors = [v for v in state.values() if isinstance(v, torch.Tensor)]
    tensors += [t for v in state.values() if isinstance(v, list) for t in v
                if isinstance(t, torch.Tensor)]
    expected = sum(t.numel() * t.element_size() for t in tensors)
    assert model_bytes(optimizer)[OPTIMIZER_STATE] == expected
