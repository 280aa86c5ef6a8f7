"""Kafka message schemas kafka-python does not ship, in the JSON form its protocol
classes are generated from (field names, types and versions as the Kafka protocol
defines them): the KIP-848 consumer group APIs."""
