"""`soap-shard`: split every op across a device mesh (FlexFlow's SOAP space).

See `soap_shard.py` for the pass, `strategies.py` for the named strategies, `plan.py`
for the completion every strategy ends with and `tasoc.ir.shard_plan` for the sharded IR.
"""

from tasoc.passes.soap.soap_shard import SoapShardFailed, SoapShardPass

__all__ = ["SoapShardFailed", "SoapShardPass"]
