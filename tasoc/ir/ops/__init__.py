"""The definitions of the `graph` dialect's ops (`tasoc.ir.opdef.OpDef`), one module
per op family. Importing this package registers every definition; `opdef.op_defs()`
does so on first use. A new op family is a new module here, listed below.
"""

from tasoc.ir.ops import (  # noqa: F401  (each module registers its definitions)
    constants,
    conv,
    elementwise,
    gnn,
    indexing,
    loss,
    matmul,
    norm,
    optimizer,
    pool,
    reduce,
    structure,
)
