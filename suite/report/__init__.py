"""What a run says: tables (tables), why a case failed (symptoms), known bugs caught
by their symptom (knownbugs).
"""
