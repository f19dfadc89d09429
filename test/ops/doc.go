// Package ops holds the tests of what operators deploy beside Weir: the
// Prometheus alerting rules (deploy/prometheus) and the Grafana dashboard
// (deploy/grafana) are checked against the metrics a real cluster serves,
// and the metrics against the REST API. It has no code of its own.
package ops
