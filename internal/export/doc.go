// Package export writes shards' records to Parquet, incrementally and
// exactly once, for readers such as DuckDB, pandas and Spark.
//
// Each shard's records go to parts named by the seq range they hold,
// DEST/shard=<url-escaped shard>/part-<first_seq>-<last_seq>.parquet (Hive
// partitioning). The published parts are the only source of truth: a run
// lists them, resumes each shard after the highest seq published, writes a
// part under a temporary name and publishes it by a create-only link or a
// create-only put. A crash at any point therefore leaves every record in at
// most one published part, and the next run fills in the rest; a state file
// only caches what the parts say, and loses to them when they disagree.
//
// Runs on the same DEST must not overlap (a Kubernetes CronJob with
// concurrencyPolicy Forbid); on a local directory, Run takes a lock.
package export
