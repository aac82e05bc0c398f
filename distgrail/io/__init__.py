"""Graph I/O: text access, ``.gra``, edge lists / Matrix Market, query pairs, binary graph files,
writers and generators."""
