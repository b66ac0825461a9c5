"""Point venvs and where packages come from: uv, the layered base, the distributions a site folder
holds, wheel builds, index settings,
release lists, the cache layout, facts about a venv and the machine, the shared toolchain, a
package's git clone (through one door that runs none of the programs its config names).

Imports: core ... launch.
"""
