package client

const rusageThread = 1 // RUSAGE_THREAD
