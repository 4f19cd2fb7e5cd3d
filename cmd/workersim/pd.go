package main

import (
	"fmt"
	"math"
	"strconv"
)

// pdPlanner decides how the worker serves a generation on its prefill/decode role, and writes the
// kv_transfer_params a prefill phase answers with.
type pdPlanner struct {
	cfg      serverConfig
	workerID string
	host     string // bound address, announced to decode workers in kv_transfer_params
	port     int
	models   *modelCatalog // the adapter a request runs with
}

// servePlan is how the worker serves one request once its P/D part is known.
type servePlan struct {
	sub          submission
	stream       bool
	includeUsage bool
	kvReply      bool   // answer with kv_transfer_params for a remote decode (vLLM prefill phase)
	phase        string // the P/D phase played, counted once the request is submitted
}

// plan decides how to serve req on this worker's role. vLLM style: do_remote_decode asks for the
// prefill only, answered with one token and the parameters a decode worker needs;
// do_remote_prefill brings a prompt computed elsewhere, whose transfer replaces the prefill.
// SGLang style: bootstrap_room marks a request sent to both workers at once; the prefill worker
// computes the prompt and answers, the decode worker generates as if the prompt was transferred.
func (pl *pdPlanner) plan(req inferenceRequest) (servePlan, error) {
	p := servePlan{
		sub: submission{prompt: req.prompt, maxTokens: req.maxTokens, streamTokens: req.stream, priority: req.priority,
			adapter: pl.models.adapterOf(req.model), salt: req.salt},
		stream: req.stream, includeUsage: req.includeUsage,
	}
	if req.priority != 0 && !pl.cfg.engine.PriorityScheduling {
		// vLLM refuses it too: the field means nothing to a first-come-first-served engine.
		return p, fmt.Errorf("%w: got priority %d but priority scheduling is not enabled (--scheduling-policy priority)",
			errBadRequest, req.priority)
	}
	kv := req.kv
	switch {
	case kv != nil && kv.doRemoteDecode && kv.doRemotePrefill:
		return p, fmt.Errorf("%w: kv_transfer_params cannot ask for both remote prefill and remote decode", errBadRequest)
	case kv != nil && kv.doRemoteDecode:
		return pl.planPrefillPhase(p)
	case kv != nil && kv.doRemotePrefill:
		return pl.planDecodePhase(p, kv)
	case req.bootstrap && pl.cfg.role == rolePrefill:
		p.sub.maxTokens, p.phase = 1, pdPrefill
	case req.bootstrap && pl.cfg.role == roleDecode:
		p.sub.remoteTokens = math.MaxInt32 // the whole prompt arrives from the prefill worker
		p.phase = pdDecode
	}
	return p, nil
}

func (pl *pdPlanner) planPrefillPhase(p servePlan) (servePlan, error) {
	if pl.cfg.role == roleDecode {
		return p, fmt.Errorf("%w: a decode worker cannot serve do_remote_decode (a prefill phase)", errBadRequest)
	}
	p.sub.maxTokens, p.sub.streamTokens = 1, false
	p.stream, p.includeUsage, p.kvReply = false, false, true
	p.phase = pdPrefill
	return p, nil
}

func (pl *pdPlanner) planDecodePhase(p servePlan, kv *kvTransferParams) (servePlan, error) {
	switch {
	case pl.cfg.role == rolePrefill:
		return p, fmt.Errorf("%w: a prefill worker cannot serve do_remote_prefill (a decode phase)", errBadRequest)
	case !kv.hasEngineID:
		return p, fmt.Errorf("%w: kv_transfer_params.remote_engine_id is required with do_remote_prefill", errBadRequest)
	case !kv.hasBlockIDs:
		return p, fmt.Errorf("%w: kv_transfer_params.remote_block_ids is required with do_remote_prefill", errBadRequest)
	}
	// The remote blocks carry the prompt's KV; the engine caps the transfer at the prompt.
	p.sub.remoteTokens = clampTokens(kv.remoteBlocks * pl.cfg.engine.BlockTokens)
	p.phase = pdDecode
	return p, nil
}

// appendKVReply appends the kv_transfer_params a prefill phase answers with: where a decode
// worker fetches the KV blocks of a prompt of promptTokens tokens.
func (pl *pdPlanner) appendKVReply(dst []byte, promptTokens int) []byte {
	dst = append(dst, `{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":`...)
	dst = appendJSONString(dst, pl.workerID)
	dst = append(dst, `,"remote_block_ids":[`...)
	for i := range pl.cfg.engine.BlocksFor(promptTokens) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(i), 10)
	}
	dst = append(dst, `],"remote_host":`...)
	dst = appendJSONString(dst, pl.host)
	dst = append(dst, `,"remote_port":`...)
	dst = strconv.AppendInt(dst, int64(pl.port), 10)
	return append(dst, '}')
}
