from rigbench.cli import app

app()
