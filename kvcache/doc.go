// Package kvcache owns the KV block pool: allocating, appending and freeing pages, reference counts,
// block tables and the prefix cache. Pure Go bookkeeping: it never touches a device or KV data.
package kvcache
