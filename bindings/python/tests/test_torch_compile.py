"""streamattn.torch's custom ops under torch.library.opcheck and torch.compile: every op
passes opcheck (schema, fake implementation, dispatch under AOTAutograd); every public
function traces into one graph; a toy model of two attention layers compiles without a graph
break and gives eager's outputs."""

import pytest

from conftest import optional_import

torch = optional_import("torch")
import streamattn  # noqa: E402
import streamattn.torch as sat  # noqa: E402  (needs torch)
from streamattn import _torch_ops as ops  # noqa: E402

CONTEXT = streamattn.Context(num_threads=1)


def randn(*shape, seed=[0]):
    seed[0] += 1
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed[0]))


def opcheck_cases():
    q, k, v = randn(2, 9, 4, 32), randn(2, 13, 2, 32), randn(2, 13, 2, 32)
    q_bf16 = q.to(torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)  # strided
    lse = randn(2, 4, 9)
    options = (None, True, 5, -1, 2.0, torch.full((4,), 0.25), randn(2, 1, 9, 13),
               randn(4), torch.tensor([13, 7], dtype=torch.int32), None, False)
    x = randn(6, 50)
    k8, v4 = sat.quantize_kv(k, "i8"), sat.quantize_kv(v, "i4", scales_dtype=torch.float32)
    fp8_scale = torch.tensor([0.01, 0.02])
    fp8 = sat.quantize_kv(v, "fp8_e4m3", scale=fp8_scale)
    pages, table = torch.zeros(6, 4, 2, 16, dtype=torch.uint8), torch.tensor([[5, 1, 3, 0],
                                                                             [2, 4, 0, 0]])
    return {
        "attention": (ops.attention_op, (q, k, v, False) + options + (None, 0)),
        "attention heads first, bf16": (
            ops.attention_op, (q_bf16, k.bfloat16(), v.bfloat16(), True) + options +
            (torch.float32, 0)),
        "attention_out": (ops.attention_out_op,
                          (q, k, v, torch.empty(2, 9, 4, 32), torch.empty(2, 4, 9)) + options +
                          (0,)),
        "attention quantized k and v": (ops.attention_op, (q, k8.values, v4.values, False) +
                                        options + (None, 0, k8.scales, v4.scales)),
        "attention_out quantized fp8 v": (ops.attention_out_op,
                                          (q, k, fp8.values, torch.empty(2, 9, 4, 32), None) +
                                          options + (0, None, fp8.scales)),
        "quantize_kv i8": (ops.quantize_kv_op, (k, "i8", None, torch.float16, None, 0)),
        "quantize_kv i4 strided": (ops.quantize_kv_op,
                                   (k.transpose(0, 1).contiguous().transpose(0, 1), "i4", 16,
                                    torch.float32, None, 0)),
        "quantize_kv fp8": (ops.quantize_kv_op, (v, "fp8_e4m3", None, torch.float16,
                                                 fp8_scale, 0)),
        "quantize_kv_out paged": (ops.quantize_kv_out_op,
                                  (k[:, :5], pages, torch.zeros(6, 4, 2, 1), None,
                                   torch.tensor([3, 0], dtype=torch.int32),
                                   table.to(torch.int32), None, 0)),
        "quantize_kv_out fp8": (ops.quantize_kv_out_op,
                                (v, torch.empty(2, 13, 2, 32, dtype=torch.float8_e4m3fn), None,
                                 fp8_scale, None, None, None, 0)),
        "merge_states": (ops.merge_states_op, ([q, q.flip(1)], [lse, lse.flip(2)], False,
                                               None, 0)),
        "merge_states_out": (ops.merge_states_out_op,
                             ([q, q.flip(1)], [lse, lse.flip(2)], torch.empty(2, 9, 4, 32),
                              None, 0)),
        "softmax": (ops.softmax_op, (x, 0.5, None, 0)),
        "softmax_out": (ops.softmax_out_op, (x.t(), torch.empty(50, 6), None, 0)),
        "log_softmax": (ops.log_softmax_op, (x.bfloat16(), None, torch.float32, 0)),
        "log_softmax_out": (ops.log_softmax_out_op, (x, torch.empty(6, 50), 2.0, 0)),
        "softmax_topk": (ops.softmax_topk_op, (x.view(2, 3, 50), 4, None, 0)),
        "softmax_topk_out": (ops.softmax_topk_out_op,
                             (x, 4, torch.empty(6, 4, dtype=torch.int32), torch.empty(6, 4),
                              torch.empty(6), 0.9, 0)),
    }


def test_every_op_is_tested():
    tested = {name.split(" ")[0] for name in opcheck_cases()}
    registered = {name for name in dir(torch.ops.streamattn)
                  if isinstance(getattr(torch.ops.streamattn, name), torch._ops.OpOverloadPacket)}
    assert tested == registered


# torch's schema check compares every tensor argument before and after the call with
# torch.allclose, which CPU float8 tensors lack ("mul_cpu_reduced_float" not implemented): the
# fp8 cases run opcheck's other checks; the same ops' schemas are checked on int8 and uint8.
NO_FLOAT8_ALLCLOSE = ("test_autograd_registration", "test_faketensor",
                      "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("case", sorted(opcheck_cases()))
def test_opcheck(case):
    op, args = opcheck_cases()[case]
    fp8 = any(isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn for a in args)
    if fp8:
        torch.library.opcheck(op, args, test_utils=NO_FLOAT8_ALLCLOSE)
    else:
        torch.library.opcheck(op, args)


def public_calls():
    q, k, v = randn(1, 4, 10, 16), randn(1, 2, 20, 16), randn(1, 2, 20, 16)
    mask = torch.rand(1, 1, 10, 20) > 0.3
    x = randn(3, 40)
    o, lse = sat.attention(q, k, v, layout="bhsd", return_lse=True)
    return {
        "attention": (lambda q, k, v: sat.attention(q, k, v, layout="bhsd", causal=True,
                                                    window=(4, None), sinks=[0.0, 1.0, 2.0, 3.0]),
                      (q, k, v)),
        "attention on a context": (lambda q: sat.attention(q, q, q, context=CONTEXT), (q,)),
        "attention into out": (lambda q, k, v, out: sat.attention(
            q, k, v, layout="bhsd", out=out, return_lse=True), (q, k, v, torch.empty_like(q))),
        "sdpa": (lambda q, k, v, m: sat.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                     enable_gqa=True),
                 (q, k, v, mask)),
        "sdpa causal": (lambda q, k, v: sat.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True), (q, k, v)),
        "attention over caches quantized": (lambda q, k, v: sat.attention(
            q, sat.quantize_kv(k, "i8", layout="bhsd"), sat.quantize_kv(
                v, "fp8_e4m3", layout="bhsd", scale=0.01), layout="bhsd", causal=True), (q, k, v)),
        "quantize into a cache": (lambda k, values, scales: sat.quantize_kv(
            k, "i4", layout="bhsd", out=(values, scales), positions=[3]),
            (k[:, :, :5], torch.zeros(1, 2, 9, 8, dtype=torch.uint8), torch.zeros(1, 2, 9, 1))),
        "merge_states": (lambda o, l: sat.merge_states([o, o], [l, l], layout="bhsd"), (o, lse)),
        "softmax": (lambda x: sat.softmax(x, dim=0, temperature=2.0), (x,)),
        "log_softmax into out": (lambda x, out: sat.log_softmax(x, out=out),
                                 (x, torch.empty_like(x))),
        "softmax_topk": (lambda x: sat.softmax_topk(x, 3, return_lse=True), (x,)),
        "softmax_topk into probs": (lambda x, p: sat.softmax_topk(x, 3, probs=p),
                                    (x, torch.empty(3, 3))),
    }


@pytest.mark.parametrize("case", sorted(public_calls()))
def test_public_functions_trace_into_one_graph(case):
    fn, args = public_calls()[case]
    want = fn(*args)
    # aot_eager: dynamo, the fake implementations and functionalization, without codegen (the
    # inductor test below compiles a whole model).
    got = torch.compile(fn, backend="aot_eager", fullgraph=True)(*args)
    for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want))):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


class AttentionLayer(torch.nn.Module):
    """A pre-norm attention block, its attention by streamattn's SDPA-compatible entry."""

    def __init__(self, dim=64, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm = torch.nn.LayerNorm(dim)
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, _ = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, n, 2, self.kv_heads, self.head_dim).unbind(2)
        y = sat.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, enable_gqa=True)
        return x + self.out(y.transpose(1, 2).reshape(b, n, -1))


def test_a_compiled_model_has_no_graph_breaks_and_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(AttentionLayer(), AttentionLayer()).eval()
    x = randn(2, 33, 64)
    with torch.no_grad():
        explanation = torch._dynamo.explain(model)(x)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        assert explanation.graph_count == 1
        assert sum("streamattn.attention" in str(node.target) for graph in explanation.graphs
                   for node in graph.graph.nodes) == 2
        want = model(x)
        got = torch.compile(model)(x)  # inductor, the default backend
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
