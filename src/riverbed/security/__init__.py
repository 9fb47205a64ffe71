"""Sans-I/O security cores: principals, SASL mechanisms (PLAIN, SCRAM), JAAS options,
the SASL server state machine. Nothing here opens a socket or reads a clock."""
