from schedmesh.mesh.worker import main

main("filter")
