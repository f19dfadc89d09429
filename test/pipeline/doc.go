// Package pipeline holds the process-level tests of Weir between real
// external systems: Kafka (franz-go's in-process kfake cluster, or a real
// broker when WEIR_KAFKA_BROKERS is set), PostgreSQL (a private server from
// Debian's package, see internal/pgtest) and NATS JetStream (an in-process
// nats-server). Each test runs a real cluster (clustertest), kills real
// processes, and checks what the external system holds at the end against
// an independent computation over the input, counting lost and duplicated
// records.
//
// The tests live in their own package, like each group of process tests
// under test/, so that `go test ./...` runs the groups side by side.
package pipeline
