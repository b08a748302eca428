// Runs one SQL statement in an in-memory DuckDB and prints its rows as a
// JSON array of objects on stdout (DuckDB's own JSON conversion: BIGINTs
// and timestamps as strings, lists as arrays, maps as arrays of {key,
// value}). rolloutd's export tests run it (internal/testutil/duckdb).
//
//   node query.js "SELECT 42 AS answer"
'use strict';
const { DuckDBInstance } = require('@duckdb/node-api');

async function main() {
  const sql = process.argv[2];
  if (!sql) {
    throw new Error('usage: node query.js SQL');
  }
  const instance = await DuckDBInstance.create(':memory:');
  const conn = await instance.connect();
  const reader = await conn.runAndReadAll(sql);
  process.stdout.write(JSON.stringify(reader.getRowObjectsJson()));
  conn.closeSync();
  instance.closeSync();
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
