// The explicit asynchronous API (nrt/nrt_async.h): filled in by the async work of issue 38.
