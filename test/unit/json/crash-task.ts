// A parser task file whose task kills its thread the way an uncaught error does: piscina
// hears the error (a message) before the thread has stopped. pool.test.ts uses it to prove
// that ParserPool.prepare() settles only after that thread's exit. Tests only.

export default function crashTask (): Promise<never> {
  setImmediate(() => { throw new Error('parser thread crash (test)') })
  return new Promise<never>(() => {})
}
