"""Airflow hooks for the Connection types lagsched adds, registered through its provider entry point.

`mysql.MySQLHook` serves conn type ``mysql`` (PyMySQL; the MySQL provider needs mysqlclient and is
not installed) and `redis.RedisHook` conn type ``lagsched_redis`` (the Redis provider's hook plus a
``test_connection``, which the provider's lacks). Kafka needs none: the apache-kafka provider's
``kafka`` type has its own. `lagsched.airflow.provider.get_provider_info` lists them for Airflow.
"""
