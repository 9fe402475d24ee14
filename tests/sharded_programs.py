"""Hand-written sharded programs shared by the tests of the sharded lowering, the
audit and `tasoc run --devices`: a mesh, sharded tensor types, and a few programs."""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.driver.sources import make_context

LINE = 'parallel.mesh @m ["d" = 8]'
GRID = 'parallel.mesh @m ["x" = 2, "y" = 4]'


def t(shape: str, dims: str, unreduced: str = "", dtype: str = "f32") -> str:
    """A sharded tensor type on @m: `t("16x8", '["d"], []')`."""
    extra = f", unreduced = [{unreduced}]" if unreduced else ""
    return f"tensor<{shape}x{dtype}, #parallel.sharding<@m, [{dims}]{extra}>>"


def program_text(mesh: str, args: dict[str, str], body: str, results: list[str]) -> str:
    """`mesh` and `@main(args) -> results { body }`; the body ends in its return."""
    params = ", ".join(f"%{name}: {type_}" for name, type_ in args.items())
    return f"{mesh}\nfunc.func @main({params}) -> ({', '.join(results)}) {{\n{body}\n}}\n"


def program(mesh: str, args: dict[str, str], body: str, results: list[str]) -> ModuleOp:
    """The verified module of `program_text`."""
    module = Parser(make_context(), program_text(mesh, args, body, results)).parse_module()
    module.verify()
    return module


GATHER = program_text(
    LINE,
    {"x": t("16x8", '["d"], []'), "w": t("8x4", "[], []")},
    f"""  %y = graph.matmul %x, %w : {t("16x4", '["d"], []')}
  %r = graph.relu %y : {t("16x4", '["d"], []')}
  %z = parallel.all_gather %r : {t("16x4", "[], []")}
  func.return %z : {t("16x4", "[], []")}""",
    [t("16x4", "[], []")],
)
"""A data-parallel matmul and relu, gathered: the smallest sharded program."""


def batchnorm(mesh: str, batch: str, channels: str = "") -> ModuleOp:
    """batchnorm_train and batchnorm_grad with the batch split by `batch` (synced:
    the statistics are all-reduced inside) and the channels by `channels`."""
    x = t("8x4x2x2", f"[{batch}], [{channels}], [], []")
    c = t("4", f"[{channels}]")
    return program(
        mesh,
        {"x": x, "s": c, "b": c, "dy": x},
        f"""  %y, %mean, %var = graph.batchnorm_train %x, %s, %b {{epsilon = 1.0e-05 : f64}}
    : {x}, {c}, {c}
  %dx, %ds, %db = graph.batchnorm_grad %x, %s, %dy {{epsilon = 1.0e-05 : f64}}
    : {x}, {c}, {c}
  func.return %y, %mean, %var, %dx, %ds, %db : {x}, {c}, {c}, {x}, {c}, {c}""",
        [x, c, c, x, c, c],
    )
