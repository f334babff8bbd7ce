"""Entry of Tessera's Pulumi component package (PulumiPlugin.yaml beside it; `pulumi package add`).

Serves TkeGpuCluster and ExistingClusterPlatform (tessera_pulumi.package) to the Pulumi engine. The
schema the CLI reads (`pulumi package get-schema`) is components/schema.json; regenerate it with
`python -m tessera_pulumi.package.codegen`.
"""
from tessera_pulumi.package.components import ExistingClusterPlatform, TkeGpuCluster
from tessera_pulumi.package.provider import serve

__all__ = ["ExistingClusterPlatform", "TkeGpuCluster"]  # the components, as top-level names of the entry module

if __name__ == "__main__":
    serve()
