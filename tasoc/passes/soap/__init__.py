"""`soap-shard`: split every op across a device mesh (FlexFlow's SOAP space).

`soap_shard.py` is the pass (options, then load -> plan -> write -> report);
`meshes.py` reads the mesh, machine and hand-fixed shardings; `profile.py` plans on
each mesh tried; `searches.py` is the table of searches (`problem.py`: what each is
given and returns; `simulated.py`: a plan priced by the simulator); `strategies.py`
the named strategies; `plan.py` the completion every strategy ends with;
`reporting.py` the report, pictures and summary; `tasoc.ir.shard_plan` writes the
sharded IR.
"""

from tasoc.passes.soap.soap_shard import SoapShardFailed, SoapShardPass

__all__ = ["SoapShardFailed", "SoapShardPass"]
