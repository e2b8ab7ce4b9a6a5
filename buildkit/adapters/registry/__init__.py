"""The registry's room: an OCI distribution-spec client and what it stands on.

The client (client), the bounded HTTP under it (transport), whose credentials go where (credentials), picking a
platform's manifest from an index (platforms), and deleting a manifest the way each registry allows (deletion)."""
