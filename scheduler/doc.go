// Package scheduler decides which sequences run in each step: waiting and running queues, the token
// budget, chunked prefill and preemption by recompute. Pure Go bookkeeping: it never touches a device.
package scheduler
