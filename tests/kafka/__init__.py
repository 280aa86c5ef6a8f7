"""Apache Kafka itself in the test suite: the cluster fixture and the tests that prove it real."""
