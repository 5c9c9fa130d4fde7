"""fakekube: a fake Kubernetes API server for tests and for the simulated node.

`fakekube.server.FakeKube` serves the apiserver's REST API over real HTTP (its module docstring
lists what is faithful and the known gaps); `fakekube.client` builds lightkube clients for it;
`python3 -m fakekube --port N` runs one as its own process. The kubelet's side of a DRA plugin
(registration, prepare/unprepare) is `simnode.kubelet.plugin`.
"""

from fakekube.server import FakeKube

__all__ = ["FakeKube"]
