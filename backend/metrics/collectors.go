package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// PoolCollector exports a pgx pool's statistics, read at scrape time.
type PoolCollector struct {
	stat func() *pgxpool.Stat
}

// NewPoolCollector collects pool.Stat().
func NewPoolCollector(pool *pgxpool.Pool) *PoolCollector {
	return &PoolCollector{stat: pool.Stat}
}

var (
	poolAcquired  = prometheus.NewDesc("parley_db_pool_acquired_connections", "Connections in use.", nil, nil)
	poolIdle      = prometheus.NewDesc("parley_db_pool_idle_connections", "Idle connections.", nil, nil)
	poolTotal     = prometheus.NewDesc("parley_db_pool_connections", "Open connections (in use, idle and being opened).", nil, nil)
	poolMax       = prometheus.NewDesc("parley_db_pool_max_connections", "Largest size of the pool.", nil, nil)
	poolAcquires  = prometheus.NewDesc("parley_db_pool_acquires_total", "Connections acquired.", nil, nil)
	poolEmpty     = prometheus.NewDesc("parley_db_pool_empty_acquires_total", "Acquires that had to wait for a connection (none idle).", nil, nil)
	poolWait      = prometheus.NewDesc("parley_db_pool_empty_acquire_wait_seconds_total", "Time spent waiting for a connection when none was idle.", nil, nil)
	poolAcquireS  = prometheus.NewDesc("parley_db_pool_acquire_seconds_total", "Time spent acquiring connections.", nil, nil)
	poolCanceled  = prometheus.NewDesc("parley_db_pool_canceled_acquires_total", "Acquires given up because their context ended.", nil, nil)
	poolNew       = prometheus.NewDesc("parley_db_pool_new_connections_total", "Connections opened.", nil, nil)
	poolLifetime  = prometheus.NewDesc("parley_db_pool_max_lifetime_closed_total", "Connections closed for their age.", nil, nil)
	poolIdleClose = prometheus.NewDesc("parley_db_pool_max_idle_closed_total", "Connections closed for idleness.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquired, poolIdle, poolTotal, poolMax, poolAcquires, poolEmpty, poolWait, poolAcquireS, poolCanceled, poolNew, poolLifetime, poolIdleClose} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stat()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(poolAcquired, float64(s.AcquiredConns()))
	gauge(poolIdle, float64(s.IdleConns()))
	gauge(poolTotal, float64(s.TotalConns()))
	gauge(poolMax, float64(s.MaxConns()))
	counter(poolAcquires, float64(s.AcquireCount()))
	counter(poolEmpty, float64(s.EmptyAcquireCount()))
	counter(poolWait, s.EmptyAcquireWaitTime().Seconds())
	counter(poolAcquireS, s.AcquireDuration().Seconds())
	counter(poolCanceled, float64(s.CanceledAcquireCount()))
	counter(poolNew, float64(s.NewConnsCount()))
	counter(poolLifetime, float64(s.MaxLifetimeDestroyCount()))
	counter(poolIdleClose, float64(s.MaxIdleDestroyCount()))
}

// QueueCollector exports the background job queue's depth, counted in the
// database at scrape time within a short timeout: a slow or unreachable
// database leaves the counts out (parley_jobs_queue_up 0) instead of holding
// the scrape.
type QueueCollector struct {
	count   func(ctx context.Context) (map[string]int, error)
	timeout time.Duration
}

// NewQueueCollector collects count, the number of jobs by state.
func NewQueueCollector(count func(ctx context.Context) (map[string]int, error)) *QueueCollector {
	return &QueueCollector{count: count, timeout: 2 * time.Second}
}

var (
	queueJobs = prometheus.NewDesc("parley_jobs", "Background jobs (River) in the database by state: available and scheduled are waiting, running are being worked, retryable failed and wait to be tried again.", []string{"state"}, nil)
	queueUp   = prometheus.NewDesc("parley_jobs_queue_up", "1 when the job counts could be read at this scrape, else 0.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueJobs
	ch <- queueUp
}

// Collect implements prometheus.Collector.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		slog.Warn("metrics: counting jobs", "err", err)
		ch <- prometheus.MustNewConstMetric(queueUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(queueUp, prometheus.GaugeValue, 1)
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(queueJobs, prometheus.GaugeValue, float64(n), state)
	}
}

// TurnCollector exports the chat turn admission queue's state, read at
// scrape time.
type TurnCollector struct {
	running, waiting func() int
	limit            int
}

// NewTurnCollector collects running (turns holding a slot, of limit) and
// waiting (turns waiting for one).
func NewTurnCollector(running, waiting func() int, limit int) *TurnCollector {
	return &TurnCollector{running: running, waiting: waiting, limit: limit}
}

var (
	turnsRunning = prometheus.NewDesc("parley_chat_turns_running", "Chat turns holding an admission slot.", nil, nil)
	turnsWaiting = prometheus.NewDesc("parley_chat_turns_waiting", "Chat turns waiting for an admission slot.", nil, nil)
	turnsMax     = prometheus.NewDesc("parley_chat_turns_max", "Admission slots: the chat turns that may run at once (--max-turns).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *TurnCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- turnsRunning
	ch <- turnsWaiting
	ch <- turnsMax
}

// Collect implements prometheus.Collector.
func (c *TurnCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(turnsRunning, prometheus.GaugeValue, float64(c.running()))
	ch <- prometheus.MustNewConstMetric(turnsWaiting, prometheus.GaugeValue, float64(c.waiting()))
	ch <- prometheus.MustNewConstMetric(turnsMax, prometheus.GaugeValue, float64(c.limit))
}
