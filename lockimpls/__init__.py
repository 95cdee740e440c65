"""Lock algorithms behind one interface (lockimpls.base.Lock); knows nothing of Locust or bench."""
