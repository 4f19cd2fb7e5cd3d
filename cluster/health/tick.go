package health

// Tick evaluates everything that depends on time passing: it judges each worker
// wedged (in flight, silent for WedgeTimeout) or degraded (token rate far below
// its peers'), opens the circuit of a worker under a verdict, half-opens a
// circuit that has been open for CBTimeout once no verdict holds it, and then
// delivers pending OnChange notifications. Run calls it every EvalInterval;
// tests call it after advancing a FakeClock. Safe for concurrent use.
func (m *Monitor) Tick() {
	now := m.now()
	list := m.workers.Load().list
	slow := m.judgeRates(list, now)
	wedge := m.cfg.WedgeTimeout.Nanoseconds()
	for i, w := range list {
		stalled := w.stalled(now, wedge)
		w.mu.Lock()
		ch := w.setVerdicts(now, stalled, slow[i])
		w.mu.Unlock()
		m.report(w, ch)
	}
	m.deliver()
}
