"""Kafka at the I/O edge: the AdminClient connection, the record sampler, the
coordinator formula and the consumer-protocol decoding."""
