"""What a run resumes from: the journal of finished calls (journal, its
fingerprints, a map's lookups a window at a time) and draining the executor
before the allocation's time limit, so the job can be requeued."""
