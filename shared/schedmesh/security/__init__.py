"""Transport security and authorization for the mesh: certificates (pki), TLS credentials and the
API token (credentials), who may call what (identity) and the server interceptors enforcing it."""
